"""How well and how fast search finds what videos show and say, and how soon."""
