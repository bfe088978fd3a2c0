"""Helpers shared by the project's own tests (imported as `support.<module>`)."""
