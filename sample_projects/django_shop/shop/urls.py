from django.urls import path

from . import views

urlpatterns = [
    path("health", views.health),
    path("orders/<int:order_id>/pay/", views.pay),
    path("unlocked/orders/<int:order_id>/pay/", views.pay),
    path("products/<int:product_id>/buy/", views.buy),
    path("state", views.state),
]
