"""Products with stock, and the orders that pay for them."""

from __future__ import annotations

from django.db import models


class Product(models.Model):
    name = models.CharField(max_length=100)
    stock = models.IntegerField()
    # The fencing token of the last lock holder that wrote the stock (lockkit tokens are
    # 64-bit): a holder whose lease ended meanwhile cannot overwrite a newer holder's write.
    fence = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    product = models.ForeignKey(Product, on_delete=models.CASCADE)
    payments = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"order {self.pk} of {self.product}"
