"""Generated code (scripts/gen-proto). Do not edit."""
