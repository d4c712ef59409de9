"""The commands: main.py (`trioproxy`, every subcommand's parser), trace_cli, trace_client,
requests_cli, status_cli, schema_cli, demo.
"""
