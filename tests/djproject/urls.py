"""Routes of the test project (views in djproject.views)."""

from django.contrib import admin
from django.urls import path

from . import async_views, idem_views, views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", views.health),
    path("unlocked/orders/<int:order_id>/pay/", views.pay),
    path("orders/<int:order_id>/pay/", views.locked_pay),
    path("mw/orders/<int:order_id>/pay/", views.pay),
    path("held/<str:name>/", views.held),
    path("boom/<str:name>/", views.boom),
    path("stream/<str:name>/", views.stream),
    path("atomic/<str:name>/", views.atomic_write),
    path("sources/", views.sources),
    path("by-function/", views.by_function),
    path("async/<str:name>/", views.async_view),
    path("cbv/<str:name>/", views.DecoratedView.as_view()),
    path("mixin/<str:name>/", views.MixinView.as_view()),
    path("amixin/<str:name>/", views.AsyncMixinView.as_view()),
    path("plain/<str:name>/", views.plain),
    path("plain-boom/<str:name>/", views.plain_boom),
    path("plain-stream/<str:name>/", views.plain_stream),
    path("plain-async/<str:name>/", views.plain_async),
    path("plain-atomic/<str:name>/", views.plain_atomic),
    path("shop/reset", views.shop_reset),
    path("shop/state", views.shop_state),
    path("idem/charge/<str:name>/", idem_views.idem_charge),
    path("unidem/charge/<str:name>/", idem_views.charge),
    path("mw-idem/charge/<str:name>/", idem_views.charge),
    path("idem/required/<str:name>/", idem_views.required_charge),
    path("idem/short/<str:name>/", idem_views.short_charge),
    path("idem/declined/<str:name>/", idem_views.declined),
    path("idem/stream/<str:name>/", idem_views.stream),
    path("idem/async/<str:name>/", idem_views.async_charge),
    path("idem/cbv/<str:name>/", idem_views.ChargeView.as_view()),
    path("idem/runs/<str:name>/", idem_views.runs),
    path("idem/atomic/<str:name>/", idem_views.atomic_charge),
    path("idem/upload/<str:name>/", idem_views.upload),
    path("aping", async_views.ping),
    path("aoverlap/unlocked/<str:name>/", async_views.unlocked),
    path("aoverlap/locked/<str:name>/", async_views.locked),
    path("mw/aoverlap/<str:name>/", async_views.unlocked),
    path("await/<str:name>/", async_views.waiting),
    path("await-blocking/<str:name>/", async_views.blocking_wait),
]
