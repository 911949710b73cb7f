"""The Lock model's base manager is its empty one, so that ``dumpdata --all`` reads no table."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("lockkit", "0001_initial")]

    operations = [
        migrations.AlterModelOptions(
            name="lock",
            options={
                "base_manager_name": "objects",
                "default_permissions": ("view",),
                "managed": False,
                "permissions": (("release_lock", "Can force-release held locks"),),
                "verbose_name": "lock",
                "verbose_name_plural": "locks",
            },
        ),
    ]
