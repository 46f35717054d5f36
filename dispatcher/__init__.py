"""The dispatcher: sessions, handles, routing and cached plans."""
