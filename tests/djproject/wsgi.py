"""WSGI entry point of the test project, for the gunicorn exclusion test."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
application = get_wsgi_application()
