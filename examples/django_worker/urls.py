"""The example worker's routes: ``/`` for ordinary messages, the cron.yaml urls with or without a trailing slash."""

from django.urls import path, re_path

from examples.django_worker import views

urlpatterns = [
    path("", views.run_task),
    re_path(r"^update/(?P<frequency>[\w-]+)/?$", views.update),
    re_path(r"^purge-sessions/?$", views.purge_sessions),
]
