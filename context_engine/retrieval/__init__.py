"""Search: query shape, the legs, fusion."""
