"""A tiny shop: products with stock, orders paid by a double-clicked button."""

from __future__ import annotations

from django.db import models


class Product(models.Model):
    name = models.CharField(max_length=50)
    stock = models.IntegerField()


class Order(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE)
    payments = models.IntegerField(default=0)


class Account(models.Model):
    balance = models.IntegerField(default=0)
    fence = models.BigIntegerField(default=0)
    version = models.IntegerField(default=0)
    small_fence = models.IntegerField(default=0)


class Charge(models.Model):
    """One run of a charging view: the side effect an Idempotency-Key must not repeat."""

    name = models.CharField(max_length=50)
    pid = models.IntegerField()
