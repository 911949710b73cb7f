"""lockkit for Celery: not built yet; the adapter arrives on top of lockkit_core."""
