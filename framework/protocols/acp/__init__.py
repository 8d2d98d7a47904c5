"""ACP for IDEs: the stdio server, the prompt turn, the fast initialize answer."""
