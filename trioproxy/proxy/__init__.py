"""One request from the ASGI call to the answer: gateway, pipeline, exchange, websocket, routing, the
stages in their order (stages.py, stage.py: the Stage interface), runtime (compiled config, shared
state).
"""
