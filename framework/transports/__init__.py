"""Protocol surfaces: thin layers that parse, frame, map errors and call the Runtime."""
