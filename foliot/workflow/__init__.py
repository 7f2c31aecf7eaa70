"""The pure core: workflow definitions and the step machine. No I/O, no Trio, no clock reads."""
