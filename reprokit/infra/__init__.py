"""Infrastructure under everything: the content-addressed caches, redaction, the named pause
points, one-thread torch import."""
