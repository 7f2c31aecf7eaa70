"""The kinds of durable things the runtime drives: each a pure machine (in `core`), its
commit and its effects."""
