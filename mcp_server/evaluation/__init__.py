"""Baseline and checkpoint evaluation, the promotion verdict, export, and the end-to-end demo."""
