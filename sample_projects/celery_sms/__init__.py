"""The payment-SMS story: ``python -m sample_projects.celery_sms`` (see ``__main__``)."""
