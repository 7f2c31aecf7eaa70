"""The pure cores: workflow definitions and the run machine, the SWF machine and model,
lease arithmetic, domain errors. No I/O, no Trio, no clock."""
