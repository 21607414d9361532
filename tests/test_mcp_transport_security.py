"""The MCP server's Host and Origin checks stay on when Django accepts any host (issue 21, item 9):
`DJANGO_ALLOWED_HOSTS=*` used to switch off DNS-rebinding protection; MCP has its own setting."""

from api.mcp_transports import _transport_security


def test_a_wildcard_in_djangos_hosts_keeps_the_mcp_checks_on(settings):
    settings.ALLOWED_HOSTS = ["*"]
    settings.MEMORY_MCP_ALLOWED_HOSTS = []
    guard = _transport_security("127.0.0.1")
    assert guard.enable_dns_rebinding_protection is True
    assert "127.0.0.1:*" in guard.allowed_hosts and "*" not in guard.allowed_hosts
    assert "http://evil.example" not in guard.allowed_origins
    assert "http://localhost:*" in guard.allowed_origins


def test_the_hosts_django_names_are_accepted_by_mcp_too(settings):
    settings.ALLOWED_HOSTS = ["memory.internal", "*"]
    settings.MEMORY_MCP_ALLOWED_HOSTS = ["agents.internal"]
    guard = _transport_security("0.0.0.0")
    assert {"memory.internal", "agents.internal", "memory.internal:*"} <= set(guard.allowed_hosts)
    assert "https://agents.internal" in guard.allowed_origins


def test_only_mcps_own_wildcard_turns_the_checks_off(settings):
    settings.MEMORY_MCP_ALLOWED_HOSTS = ["*"]
    assert _transport_security("127.0.0.1").enable_dns_rebinding_protection is False
