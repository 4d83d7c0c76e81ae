"""Coordinator side: checkpoint metadata, state assignment on restore and rescale."""
