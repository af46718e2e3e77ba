"""Minimization: the smallest variant (params) or program (graph) that keeps an outcome."""
