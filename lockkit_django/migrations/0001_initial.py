"""The unmanaged Lock model: no table, the admin page's two permissions."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Lock",
            fields=[
                ("key", models.CharField(max_length=200, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "lock",
                "verbose_name_plural": "locks",
                "permissions": (("release_lock", "Can force-release held locks"),),
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
