"""tensorwire package."""
