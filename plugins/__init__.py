"""rooflinekit's built-in plugins, registered through the `rooflinekit` entry-point group."""
