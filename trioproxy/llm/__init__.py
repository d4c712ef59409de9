"""LLM traffic: usage.py (token usage, stream_options), models.py (the llm: format), providers.py
(hosts, endpoint kinds), translate/ (provider translation).
"""
