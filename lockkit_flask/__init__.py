"""lockkit for Flask: not built yet; the adapter arrives on top of lockkit_core."""
