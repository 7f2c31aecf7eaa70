"""The AWS SWF face: protocol edge (SigV4, shapes, faults), registry, and the execution machine."""
