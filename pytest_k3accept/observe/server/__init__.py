"""Starting, watching and stopping the server process under test."""
