"""The example worker as a small Django project (settings, urls and views; no database).

Run it: ``make run ARGS="--app examples.django_worker.wsgi:application"``.
"""
