"""Files that once took the bot down, sent as people send them (issue 32).

Each is a file message in a DM: the emulator serves its bytes through the message-resources
API, the bot downloads them with lark-oapi and reads them in its reader processes. What
must hold: the sender hears why (or gets the text), nobody else waits on it, ``/stop`` ends
the reading itself, and the bot's own process never parses the bytes.
"""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import pytest
from media.hostile_files import HOSTILE_FILES, pdf_of_slow_pages

from bot.app import SERVICES
from bot.media.limits import ReaderLimits

from e2e.harness import VERIFICATION_TOKEN, running_bot, settings_for

# What each reproduction must say to its sender (the file's text, or why there is none).
SAID = {
    "grid-span": "wide",
    "docx-200MiB-part": "word/document.xml, unpacked, is 200 MiB, the limit is 16 MiB",
    "vertical-merges": "no text",
    "xlsx-200MiB-strings": "xl/sharedStrings.xml, unpacked, is 201 MiB, the limit is 16 MiB",
    "pdf-shared-stream": "no page could be read",
}


def _alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _model_saw(bot) -> str:
    return "\n".join(str(request.body["messages"]) for request in bot.llm_server.requests)


async def _send_file(bot, message_id: str, name: str, data: bytes, **fields) -> None:
    message = bot.feishu.add_file_message(
        message_id, chat_id=fields.pop("chat_id", "oc_dm"), data=data, file_name=name, **fields
    )
    envelope = bot.feishu.message_event(message, verification_token=VERIFICATION_TOKEN)
    assert await bot.push(envelope) == 200


@pytest.mark.parametrize("name", sorted(SAID))
async def test_each_reproduction_is_answered_plainly_without_the_bot_parsing_it(bot, name):
    file_name, make = HOSTILE_FILES[name]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    await _send_file(bot, "om_hostile", file_name, make())
    said = await bot.reply("om_hostile", within=30)
    await bot.settle(within=30)
    assert SAID[name] in said + _model_saw(bot)
    readers = bot.app[SERVICES].readers
    assert readers.stats.files == 1 and readers.stats.over_time == 0
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 64, f"the bot's process grew by {grown_mib:.0f} MiB reading {name}"


async def test_stop_while_a_file_is_read_kills_its_reader_and_the_model_is_never_asked(
    tmp_path, feishu, llm_server
):
    settings = settings_for(tmp_path, feishu, llm_server)
    async with running_bot(settings, feishu, llm_server) as bot:
        readers = bot.app[SERVICES].readers
        await _send_file(bot, "om_slow", "slow.pdf", pdf_of_slow_pages())
        await bot.wait_for(lambda: readers.reading == 1, within=15)
        (pid,) = readers.pids()
        await bot.say("om_stop", "/stop")
        assert "Stopped" in await bot.reply("om_stop")
        await bot.wait_for(lambda: not _alive(pid), within=5)
        await bot.settle()
        assert readers.stats.killed == 1
        assert llm_server.requests == []  # the stopped question never reached the model


async def test_other_people_are_answered_while_every_reader_is_busy(tmp_path, feishu, llm_server):
    settings = settings_for(tmp_path, feishu, llm_server)
    limits = ReaderLimits(seconds=20, soft_seconds=15)
    async with running_bot(settings, feishu, llm_server, reader_limits=limits) as bot:
        readers = bot.app[SERVICES].readers
        for number in range(limits.processes + 2):  # more slow files than readers
            await _send_file(
                bot,
                f"om_slow{number}",
                "slow.pdf",
                pdf_of_slow_pages(),
                chat_id=f"oc_dm{number}",
                sender_open_id=f"ou_sender{number}",
            )
        await bot.wait_for(lambda: readers.reading == limits.processes, within=15)
        await bot.say("om_plain", "what is the capital of France?", chat_id="oc_carol")
        said = await bot.reply("om_plain", within=10)
        assert "capital of France" in said
        # Answered while the readers were still on the slow files, not after them.
        assert readers.reading == limits.processes
        await asyncio.gather(
            *(bot.say(f"om_stop{n}", "/stop", chat_id=f"oc_dm{n}") for n in range(4))
        )
