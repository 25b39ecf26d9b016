"""Test kits: servers for fault injection. Never proof that judging works: real models do that."""
