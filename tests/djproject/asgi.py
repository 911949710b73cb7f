"""ASGI entry point of the test project, for the uvicorn tests of async views."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
application = get_asgi_application()
