"""The Unity side: the player stand-in that the builds run, its protocol and side channels."""
