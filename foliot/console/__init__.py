"""The operator console: server-rendered pages under `/console` (docs/console.md)."""
