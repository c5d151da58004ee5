"""A tiny MCP server for the MCP connector's tests, built on the SDK's MCPServer.

Run it over stdio (``python mcp_server_fixture.py``) or over streamable HTTP
(``python mcp_server_fixture.py --http PORT``); tests may also serve ``build_server()``
in-process with uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

# A 1x1 transparent PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def build_server() -> MCPServer:
    server = MCPServer("larkgate-test", log_level="WARNING")
    notes: dict[str, str] = {}

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def read_note(name: str) -> str:
        """Read the note called name."""
        if name not in notes:
            raise ToolError(f"no note called {name!r}")
        return notes[name]

    @server.tool()
    def write_note(name: str, text: str) -> str:
        """Write a note."""
        notes[name] = text
        return f"saved {name}"

    @server.tool()
    async def write_note_slowly(name: str, text: str, seconds: float) -> str:
        """Wait, then write a note."""
        await asyncio.sleep(seconds)
        notes[name] = text
        return f"saved {name}"

    @server.tool()
    def fail() -> str:
        """Always fails, as an error result."""
        raise ToolError("the fail tool always fails")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool(structured_output=False)
    def picture() -> list[object]:
        """A caption and a tiny image."""
        return ["a pixel", Image(data=PIXEL, format="png")]

    @server.tool(name="notes.search", description="Search notes by substring.")
    def search(query: str) -> str:
        return "\n".join(name for name, text in notes.items() if query in text) or "(none)"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    args = parser.parse_args()
    server = build_server()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
