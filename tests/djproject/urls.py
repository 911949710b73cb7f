"""Routes of the test project (views in djproject.views)."""

from django.contrib import admin
from django.urls import path

from . import views

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
]
