"""The `trainparity` command: main (parser, dispatch), common (shared helpers), one module per command."""
