"""The WSGI entry point, as ``django-admin startproject`` writes it: the ``app`` setting names ``application``."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_worker.settings")

application = get_wsgi_application()
