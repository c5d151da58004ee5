"""The connector hub: connectors whose actions become engine tools."""
