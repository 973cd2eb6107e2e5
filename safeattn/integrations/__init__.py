"""Glue for frameworks that call attention through their own interfaces (optional extras)."""
