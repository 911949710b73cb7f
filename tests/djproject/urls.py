"""Routes of the test project (views in djproject.views)."""

urlpatterns: list[object] = []
