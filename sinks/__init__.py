"""Result sinks: Lance tables, the vector index and the object store. Every write is idempotent."""
