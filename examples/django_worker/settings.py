"""Django settings of the example worker: no database, no sessions, no templates."""

SECRET_KEY = "example-worker-not-secret"  # an example; a real project reads its own from a secret
DEBUG = False
# sqsd posts to localhost, and so does Worker Tier's adapter (Host: localhost).
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "examples.django_worker.urls"
INSTALLED_APPS: list[str] = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
# Cron urls come with and without a trailing slash; the urls accept both, so nothing redirects (a 301 is a failure).
APPEND_SLASH = False
DATABASES: dict[str, dict] = {}
USE_TZ = True
