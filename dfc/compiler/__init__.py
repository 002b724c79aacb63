"""Everything that BUILDS graphs."""
