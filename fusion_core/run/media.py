"""Images, video frames and audio for a check: the user's files, or seeded synthetic ones.

Files are read with Pillow (images), PyAV (video frames, as RGB arrays) and soundfile
(audio, mono float32). A missing file is a usage error naming the option; a file that
cannot be read is a :class:`~fusion_core.errors.CheckError` saying why (one line).
Sizes are bounded: a video gives at most :data:`MAX_FRAMES` frames, an audio file at most
:data:`MAX_AUDIO_SECONDS` seconds, an image at most :data:`MAX_IMAGE_PIXELS` pixels.
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
    from PIL import Image

    file = _existing("image", path)
    try:
        with Image.open(file) as img:
            if img.width * img.height > MAX_IMAGE_PIXELS:
                raise CheckError(f"image file {printable(file.name)}: {img.width}x{img.height} px is over the limit")
            picture = img.convert("RGB")
    except CheckError:
        raise
    except Exception as e:  # Pillow's UnidentifiedImageError, a truncated file...
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
    try:
        with av.open(str(file)) as container:
            decoded = []
            for frame in container.decode(video=0):
                decoded.append(frame.to_ndarray(format="rgb24"))
                if len(decoded) >= MAX_FRAMES:
                    break
    except Exception as e:
        raise CheckError(
            f"video file {printable(file.name)}: not a video PyAV can decode ({one_line(e, first=True, limit=200)})"
        ) from None
    if not decoded:
        raise CheckError(f"video file {printable(file.name)}: no video frames")
    step = max(1, len(decoded) // want)
    picked = decoded[::step][:want]
    while len(picked) < want:  # a short clip: its last frame repeated
        picked.append(picked[-1])
    return Media("video", [picked], file.name)


def read_audio(path: str, sampling_rate: int) -> Media:
    """An audio file as one mono waveform at ``sampling_rate`` (linear resampling).

    Raises:
        OptionError: no such file (option ``audio``).
        CheckError: not audio soundfile reads.
    """
    import numpy as np
    import soundfile

    file = _existing("audio", path)
    try:
        info = soundfile.info(str(file))
        stop = int(min(info.frames, MAX_AUDIO_SECONDS * info.samplerate))
        data, rate = soundfile.read(str(file), frames=stop, dtype="float32", always_2d=True)
    except Exception as e:
        raise CheckError(
            f"audio file {printable(file.name)}: not audio soundfile can read ({one_line(e, first=True, limit=200)})"
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
