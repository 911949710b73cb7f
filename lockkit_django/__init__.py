"""lockkit for Django: not built yet; the adapter arrives on top of lockkit_core."""
