"""Soaks: the service under crashes and faults (``chaos``) and over long runs (``growth``)."""
