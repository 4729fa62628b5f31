"""Images, video frames and audio for a check: the user's files, or seeded synthetic ones.

Files are read with Pillow (images), PyAV (video frames, as RGB arrays) and soundfile
(audio, mono float32). A missing file is a usage error naming the option; a file that
cannot be read is a :class:`~fusion_core.errors.CheckError` saying why (one line).
Sizes are bounded before anything is decoded (issue 32): an image is opened only in the
formats of :data:`IMAGE_FORMATS` (never EPS/PostScript, which Pillow hands to Ghostscript)
with Pillow's decompression-bomb limit at :data:`MAX_IMAGE_PIXELS`; a video's frame size
comes from the container's header (at most :data:`MAX_FRAME_PIXELS` a frame, and the frames
kept at most :data:`MAX_VIDEO_BYTES`) and at most :data:`MAX_FRAMES` frames are decoded; an
audio file's channels x rate x seconds (from its header) are at most
:data:`MAX_AUDIO_SAMPLES`, of at most :data:`MAX_AUDIO_SECONDS` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..boundary.options import OptionError
from ..errors import CheckError, one_line
from ..text import printable

MAX_FRAMES = 64
MAX_AUDIO_SECONDS = 60.0
MAX_IMAGE_PIXELS = 64 * 2**20
#: formats an image file may be in: raster formats Pillow decodes itself
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF", "PPM", "TGA")
MAX_FRAME_PIXELS = 4096 * 2304  # a 4K frame and then some
MAX_VIDEO_BYTES = 1024 * 2**20  # the RGB frames kept
MAX_AUDIO_CHANNELS = 64
MAX_AUDIO_RATE = 384_000
MAX_AUDIO_SAMPLES = 64 * 2**20  # channels x frames decoded: 256 MB of float32
DEFAULT_FRAMES = 4
DEFAULT_AUDIO_SECONDS = 1.0


@dataclass
class Media:
    """What one run feeds besides text: ``kind`` is "image", "video" or "audio"."""

    kind: str
    items: list[Any]  # PIL images | lists of HxWx3 uint8 frames | 1-D float32 waveforms
    source: str  # "synthetic" or the file name
    sampling_rate: int = 0  # audio

    def size(self) -> str:
        """What one item is: ``32x28 px``, ``4 frames of 56x56 px``, ``1.0 s at 16000 Hz``."""
        first = self.items[0]
        if self.kind == "image":
            return f"{first.width}x{first.height} px"
        if self.kind == "video":
            h, w = first[0].shape[:2]
            return f"{len(first)} frames of {w}x{h} px"
        return f"{len(first) / self.sampling_rate:.2f} s at {self.sampling_rate} Hz"


def _existing(option: str, path: str) -> Path:
    file = Path(path).expanduser()
    if not file.is_file():
        raise OptionError(option, f"{printable(str(path)[:200])}: no such file")
    return file


def read_image(path: str) -> Media:
    """An image file as one RGB picture.

    Raises:
        OptionError: no such file (option ``image``).
        CheckError: not an image Pillow reads, or larger than :data:`MAX_IMAGE_PIXELS`.
    """
    import warnings

    from PIL import Image

    file = _existing("image", path)
    if Image.MAX_IMAGE_PIXELS is None or Image.MAX_IMAGE_PIXELS > MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS  # Pillow's decompression-bomb limit (an error at twice it)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(file, formats=IMAGE_FORMATS) as img:
                if img.width * img.height > MAX_IMAGE_PIXELS:
                    raise CheckError(
                        f"image file {printable(file.name)}: {img.width}x{img.height} px is over the limit of "
                        f"{MAX_IMAGE_PIXELS:,} pixels"
                    )
                picture = img.convert("RGB")
    except CheckError:
        raise
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise CheckError(f"image file {printable(file.name)}: over the limit of {MAX_IMAGE_PIXELS:,} pixels") from None
    except Image.UnidentifiedImageError:
        raise CheckError(
            f"image file {printable(file.name)}: not an image Pillow can read in the formats a check takes "
            f"({', '.join(IMAGE_FORMATS)}; EPS and PostScript are never opened)"
        ) from None
    except Exception as e:  # a truncated file...
        raise CheckError(
            f"image file {printable(file.name)}: not an image Pillow can read ({one_line(e, first=True, limit=200)})"
        ) from None
    return Media("image", [picture], file.name)


def read_video(path: str, frames: int | None = None) -> Media:
    """Up to ``frames`` (default :data:`DEFAULT_FRAMES`) evenly spaced RGB frames of a video file.

    Raises:
        OptionError: no such file (option ``video``).
        CheckError: not a video PyAV decodes.
    """
    import av

    file = _existing("video", path)
    want = min(frames or DEFAULT_FRAMES, MAX_FRAMES)
    name = printable(file.name)
    try:
        with av.open(str(file)) as container:
            if not container.streams.video:
                raise CheckError(f"video file {name}: no video stream")
            stream = container.streams.video[0]
            _frame_size(name, stream.codec_context.width, stream.codec_context.height, want)
            # how many frames there are (up to MAX_FRAMES), from the packets alone: nothing decoded
            count = 0
            for packet in container.demux(stream):
                if packet.size:
                    count += 1
                    if count >= MAX_FRAMES:
                        break
            step = max(1, count // want)
            keep = set(range(0, count, step)[:want]) if count else {0}
        decoded: list[Any] = []
        with av.open(str(file)) as container:
            for i, frame in enumerate(container.decode(container.streams.video[0])):
                _frame_size(name, frame.width, frame.height, want)  # the header may lie
                if i in keep:
                    decoded.append(frame.to_ndarray(format="rgb24"))
                if len(decoded) >= len(keep) or i + 1 >= MAX_FRAMES:
                    break
    except CheckError:
        raise
    except Exception as e:
        raise CheckError(
            f"video file {name}: not a video PyAV can decode ({one_line(e, first=True, limit=200)})"
        ) from None
    if not decoded:
        raise CheckError(f"video file {name}: no video frames")
    picked = decoded[:want]
    while len(picked) < want:  # a short clip: its last frame repeated
        picked.append(picked[-1])
    return Media("video", [picked], file.name)


def _frame_size(name: str, width: int, height: int, frames: int) -> None:
    """Refuse a video whose frames are too large to decode or keep, before decoding them."""
    pixels = int(width or 0) * int(height or 0)
    if pixels > MAX_FRAME_PIXELS or pixels * 3 * frames > MAX_VIDEO_BYTES:
        raise CheckError(
            f"video file {name}: frames of {width}x{height} px are over the limit ({MAX_FRAME_PIXELS:,} pixels a frame, "
            f"{MAX_VIDEO_BYTES // 2**20} MB for {frames} frames); refused before decoding"
        )


def read_audio(path: str, sampling_rate: int) -> Media:
    """An audio file as one mono waveform at ``sampling_rate`` (linear resampling).

    Raises:
        OptionError: no such file (option ``audio``).
        CheckError: not audio soundfile reads.
    """
    import numpy as np
    import soundfile

    file = _existing("audio", path)
    name = printable(file.name)
    try:
        info = soundfile.info(str(file))
    except Exception as e:
        raise CheckError(
            f"audio file {name}: not audio soundfile can read ({one_line(e, first=True, limit=200)})"
        ) from None
    stop = int(min(info.frames, MAX_AUDIO_SECONDS * info.samplerate))
    if (
        info.channels > MAX_AUDIO_CHANNELS
        or info.samplerate > MAX_AUDIO_RATE
        or stop * info.channels > MAX_AUDIO_SAMPLES
    ):
        raise CheckError(
            f"audio file {name}: {info.channels} channels x {info.samplerate:,} Hz x {stop / max(info.samplerate, 1):.1f} s "
            f"is over the limit ({MAX_AUDIO_CHANNELS} channels, {MAX_AUDIO_RATE:,} Hz, {MAX_AUDIO_SAMPLES:,} samples); "
            "refused before decoding"
        )
    try:
        data, rate = soundfile.read(str(file), frames=stop, dtype="float32", always_2d=True)
    except Exception as e:
        raise CheckError(
            f"audio file {name}: not audio soundfile can read ({one_line(e, first=True, limit=200)})"
        ) from None
    wave = data.mean(axis=1)
    if not len(wave):
        raise CheckError(f"audio file {printable(file.name)}: no samples")
    if rate != sampling_rate:
        n = max(1, round(len(wave) * sampling_rate / rate))
        wave = np.interp(np.linspace(0, len(wave) - 1, n), np.arange(len(wave)), wave).astype(np.float32)
    return Media("audio", [wave], file.name, sampling_rate)


def synthetic_image(width: int, height: int, seed: int, count: int = 1) -> Media:
    """Seeded noise pictures of ``width`` x ``height``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pictures = [Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)) for _ in range(count)]
    return Media("image", pictures, "synthetic")


def synthetic_video(width: int, height: int, frames: int, seed: int, count: int = 1) -> Media:
    import numpy as np

    rng = np.random.default_rng(seed)
    clips = [[rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(frames)] for _ in range(count)]
    return Media("video", clips, "synthetic")


def synthetic_audio(seconds: float, sampling_rate: int, seed: int, count: int = 1) -> Media:
    import numpy as np

    rng = np.random.default_rng(seed)
    n = max(1, int(seconds * sampling_rate))
    waves = [(0.1 * rng.standard_normal(n)).astype(np.float32) for _ in range(count)]
    return Media("audio", waves, "synthetic", sampling_rate)
