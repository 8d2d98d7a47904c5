"""The wire protocols, one folder each, beside the runtime: A2A (HTTP and stdio, and the client), ACP."""
