"""Local servers speaking each provider's real wire format, streaming included."""
