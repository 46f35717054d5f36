"""``tw.utils.tensorboard``: torch's ``SummaryWriter``, writing TensorBoard event files of tensorwire values.

``from tensorwire.utils.tensorboard import SummaryWriter`` (or ``torch.utils.tensorboard`` under
``import tensorwire as torch``) writes the same event files as torch's writer, through the ``tensorboard`` package's
own ``EventFileWriter`` and protocol buffers; tensors are fetched from the cluster and converted to numpy first.
``tensorboard`` is optional (``pip install tensorboard``, or the ``tensorboard`` extra): this module imports without it,
and making a ``SummaryWriter`` then raises an ``ImportError`` saying so.

Written as torch writes them: scalars (``add_scalar``, ``add_scalars``), histograms (``add_histogram``, torch's
TensorFlow-style default bins), images (``add_image``, ``add_images``: PNG, through Pillow), matplotlib figures
(``add_figure``), text (``add_text``) and hyperparameters (``add_hparams``). ``add_graph`` warns and writes nothing
(tensorwire has no traced graph to show); the other ``add_*`` of torch's writer raise ``NotImplementedError``.
"""

from __future__ import annotations

import io
import math
import os
import socket
import sys
import time
import warnings
from datetime import datetime

import numpy as np

from ..tensor import Tensor

__all__ = ["SummaryWriter"]

try:  # tensorboard is an optional dependency (an ImportError when a SummaryWriter is made without it)
    from google.protobuf import struct_pb2
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import metadata as hparams_metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo, SessionStartInfo
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as e:  # pragma: no cover - exercised where tensorboard is not installed
    _MISSING: ImportError | None = e
else:
    _MISSING = None
try:  # Pillow encodes images (a dependency of tensorboard's, optional here)
    from PIL import Image as _PILImage
except ImportError:  # pragma: no cover
    _PILImage = None

_NO_TENSORBOARD = ("TensorBoard logging requires the tensorboard package: pip install tensorboard (or "
                   "pip install 'tensorwire[tensorboard]')")


def _np(x) -> np.ndarray:
    """A value as a numpy array: a tensor is fetched from the cluster (detached), anything else through numpy."""
    if isinstance(x, Tensor):
        return x.detach().numpy()
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a PyTorch tensor
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _scalar(x) -> float:
    arr = _np(x)
    if arr.squeeze().ndim != 0:
        raise ValueError(f"scalar should be 0D, got a value of shape {arr.shape}")
    return float(arr.reshape(()))


def _default_bins() -> list[float]:
    """TensorFlow's histogram buckets, torch's default (``bins="tensorflow"``): ±1e-12 growing by 10% to 1e20."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-b for b in reversed(pos)] + [0.0] + pos


def _histogram(values: np.ndarray, bins, max_bins: int | None):
    """The ``HistogramProto`` torch writes: numpy's histogram, trimmed to the buckets from the first to the last
    non-empty one (with one empty bucket before, as torch keeps it), merged down to ``max_bins`` when given."""
    values = values.reshape(-1).astype(np.float64)
    if values.size == 0:
        raise ValueError("The input has no element.")
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        sub = len(counts) // max_bins
        pad = -len(counts) % sub
        counts = np.pad(counts, (0, pad)).reshape(-1, sub).sum(axis=-1)
        limits = np.concatenate([limits[:-1][::sub], limits[-1:]])
    cum = np.cumsum(np.greater(counts, 0))
    start, end = (int(i) for i in np.searchsorted(cum, [0, cum[-1] - 1], side="right"))
    end += 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("The histogram is empty")
    return summary_pb2.HistogramProto(min=values.min(), max=values.max(), num=len(values), sum=values.sum(),
                                      sum_squares=float(values.dot(values)), bucket_limit=limits.tolist(),
                                      bucket=counts.tolist())


def _grid(images: np.ndarray, ncols: int = 8) -> np.ndarray:
    """(N, C, H, W) images side by side, ``ncols`` a row, as one (C, H', W') image (torch's ``make_grid``)."""
    if images.shape[1] == 1:
        images = np.concatenate([images] * 3, 1)
    n, c, h, w = images.shape
    ncols = min(n, ncols)
    nrows = math.ceil(n / ncols)
    canvas = np.zeros((c, h * nrows, w * ncols), dtype=images.dtype)
    for i in range(n):
        y, x = divmod(i, ncols)
        canvas[:, y * h:(y + 1) * h, x * w:(x + 1) * w] = images[i]
    return canvas


def _to_hwc(img: np.ndarray, dataformats: str) -> np.ndarray:
    """An image in ``dataformats`` (``"CHW"``, ``"HWC"``, ``"HW"``, ``"NCHW"``, ``"NHWC"`` ...) as (H, W, 3 or 4)."""
    fmt = dataformats.upper()
    if len(set(fmt)) != len(fmt) or len(fmt) != img.ndim or not set(fmt) <= set("NCHW"):
        raise ValueError(f"dataformats {dataformats!r} does not describe an image of shape {img.shape}")
    if "N" in fmt:
        img = _grid(img.transpose([fmt.index(d) for d in "NCHW"]))
        fmt = "CHW"
    if fmt == "HW":
        return np.stack([img] * 3, axis=2)
    img = img.transpose([fmt.index(d) for d in "HWC"])
    return np.concatenate([img] * 3, 2) if img.shape[2] == 1 else img


def _image(tag: str, img: np.ndarray, dataformats: str):
    if _PILImage is None:
        raise ImportError("SummaryWriter.add_image needs Pillow to encode PNG images: pip install pillow")
    hwc = _to_hwc(img, dataformats)
    scale = 1 if hwc.dtype == np.uint8 else 255
    hwc = (hwc.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    _PILImage.fromarray(hwc).save(buf, format="PNG")
    h, w, c = hwc.shape
    im = summary_pb2.Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=buf.getvalue())
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, image=im)])


def _plugin(name: str, content: bytes = b"") -> summary_pb2.SummaryMetadata:
    return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=name,
                                                                                          content=content))


class _FileWriter:
    """Events into one event file (tensorboard's ``EventFileWriter``), each stamped with its step and wall time."""

    def __init__(self, log_dir: str, max_queue: int, flush_secs: int, filename_suffix: str):
        self._w = EventFileWriter(log_dir, max_queue, flush_secs, filename_suffix)

    def get_logdir(self) -> str:
        return self._w.get_logdir()

    def add_event(self, event, step: int | None = None, walltime: float | None = None) -> None:
        event.wall_time = time.time() if walltime is None else walltime
        if step is not None:
            event.step = int(step)
        self._w.add_event(event)

    def add_summary(self, summary, step: int | None = None, walltime: float | None = None) -> None:
        self.add_event(event_pb2.Event(summary=summary), step, walltime)

    def flush(self) -> None:
        self._w.flush()

    def close(self) -> None:
        self._w.close()


class SummaryWriter:
    """torch's ``SummaryWriter``: logs to ``log_dir`` (default ``runs/<date>_<host><comment>``) event files
    TensorBoard reads. Values may be tensorwire tensors, numpy arrays or numbers."""

    def __init__(self, log_dir: str | None = None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: int = 120, filename_suffix: str = ""):
        if _MISSING is not None:
            raise ImportError(_NO_TENSORBOARD) from _MISSING
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = max_queue, flush_secs, filename_suffix
        self.file_writer: _FileWriter | None = None
        self.all_writers: dict[str, _FileWriter] = {}
        self._get_file_writer()

    def _get_file_writer(self) -> _FileWriter:
        if self.file_writer is None:
            self.file_writer = _FileWriter(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self.all_writers = {self.file_writer.get_logdir(): self.file_writer}
            if self.purge_step is not None:  # TensorBoard drops the events after this step from earlier runs
                step, self.purge_step = self.purge_step, None
                self.file_writer.add_event(event_pb2.Event(file_version="brain.Event:2"), step)
                self.file_writer.add_event(
                    event_pb2.Event(session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)), step)
        return self.file_writer

    def get_logdir(self) -> str:
        """The directory the event files go to."""
        return self.log_dir

    # -- what torch's writer writes ------------------------------------------------------------------------------------
    def add_scalar(self, tag: str, scalar_value, global_step: int | None = None, walltime: float | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        """One number (a Python number, a one-element tensor or array) under ``tag`` at ``global_step``."""
        v = _scalar(scalar_value)
        if new_style:
            tensor = tensor_pb2.TensorProto(double_val=[v], dtype="DT_DOUBLE") if double_precision else \
                tensor_pb2.TensorProto(float_val=[v], dtype="DT_FLOAT")
            value = summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=_plugin("scalars"))
        else:
            value = summary_pb2.Summary.Value(tag=tag, simple_value=v)
        self._get_file_writer().add_summary(summary_pb2.Summary(value=[value]), global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step: int | None = None,
                    walltime: float | None = None) -> None:
        """Several numbers on one chart: each key's values go to a run of its own (``<log_dir>/<main_tag>_<key>``),
        as torch writes them."""
        walltime = time.time() if walltime is None else walltime
        root = self._get_file_writer().get_logdir()
        for tag, value in tag_scalar_dict.items():
            path = os.path.join(root, f"{main_tag.replace('/', '_')}_{tag}")
            w = self.all_writers.get(path)
            if w is None:
                w = self.all_writers[path] = _FileWriter(path, self.max_queue, self.flush_secs, self.filename_suffix)
            w.add_summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=main_tag,
                                                                               simple_value=_scalar(value))]),
                          global_step, walltime)

    def add_histogram(self, tag: str, values, global_step: int | None = None, bins="tensorflow",
                      walltime: float | None = None, max_bins: int | None = None) -> None:
        """A histogram of ``values`` (``bins``: numpy's ``bins`` argument, or ``"tensorflow"``, torch's default)."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = _default_bins()
        hist = _histogram(_np(values), bins, max_bins)
        self._get_file_writer().add_summary(summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag,
                                                                                                 histo=hist)]),
                                            global_step, walltime)

    def add_image(self, tag: str, img_tensor, global_step: int | None = None, walltime: float | None = None,
                  dataformats: str = "CHW") -> None:
        """An image: floats in [0, 1] or ``uint8`` in [0, 255], laid out as ``dataformats`` says."""
        self._get_file_writer().add_summary(_image(tag, _np(img_tensor), dataformats), global_step, walltime)

    def add_images(self, tag: str, img_tensor, global_step: int | None = None, walltime: float | None = None,
                   dataformats: str = "NCHW") -> None:
        """A batch of images, shown as one grid (eight a row)."""
        self._get_file_writer().add_summary(_image(tag, _np(img_tensor), dataformats), global_step, walltime)

    def add_figure(self, tag: str, figure, global_step: int | None = None, close: bool = True,
                   walltime: float | None = None) -> None:
        """A matplotlib figure (or a list of them, as a grid), rendered to an image."""
        figures = figure if isinstance(figure, list) else [figure]
        images = []
        for fig in figures:
            fig.canvas.draw()
            images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].transpose(2, 0, 1))
            plt = sys.modules.get("matplotlib.pyplot")  # (a figure pyplot made: it keeps it until closed)
            if close and plt is not None:
                plt.close(fig)
        img = np.stack(images) if isinstance(figure, list) else images[0]
        self.add_image(tag, img, global_step, walltime, dataformats="NCHW" if isinstance(figure, list) else "CHW")

    def add_text(self, tag: str, text_string: str, global_step: int | None = None,
                 walltime: float | None = None) -> None:
        """Text (markdown) under ``<tag>/text_summary``, as torch writes it."""
        tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[text_string.encode("utf_8")],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        value = summary_pb2.Summary.Value(tag=tag + "/text_summary", tensor=tensor,
                                          metadata=_plugin("text", TextPluginData(version=0).SerializeToString()))
        self._get_file_writer().add_summary(summary_pb2.Summary(value=[value]), global_step, walltime)

    def add_hparams(self, hparam_dict: dict, metric_dict: dict, hparam_domain_discrete: dict | None = None,
                    run_name: str | None = None, global_step: int | None = None) -> None:
        """A run's hyperparameters and its final metrics, for TensorBoard's HParams tab (a run of its own,
        ``<log_dir>/<run_name>``, by default the current time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        summaries = _hparams(hparam_dict, metric_dict, hparam_domain_discrete or {})
        logdir = os.path.join(self._get_file_writer().get_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as w:
            for s in summaries:
                w._get_file_writer().add_summary(s, global_step)
            for k, v in metric_dict.items():
                w.add_scalar(k, v, global_step)

    def add_graph(self, model, input_to_model=None, verbose: bool = False, use_strict_trace: bool = True) -> None:
        """Nothing is written: torch traces the model with TorchScript, which tensorwire does not have (a warning
        says so; the rest of the log is unaffected)."""
        warnings.warn("SummaryWriter.add_graph: tensorwire has no traced graph to show in TensorBoard; nothing was "
                      "written", stacklevel=2)

    def _unsupported(self, name: str):
        raise NotImplementedError(f"SummaryWriter.{name} is not supported by tensorwire's writer (it writes scalars, "
                                  "histograms, images, figures, text and hparams)")

    def add_embedding(self, *args, **kwargs):
        self._unsupported("add_embedding")

    def add_video(self, *args, **kwargs):
        self._unsupported("add_video")

    def add_audio(self, *args, **kwargs):
        self._unsupported("add_audio")

    def add_pr_curve(self, *args, **kwargs):
        self._unsupported("add_pr_curve")

    def add_mesh(self, *args, **kwargs):
        self._unsupported("add_mesh")

    def add_custom_scalars(self, *args, **kwargs):
        self._unsupported("add_custom_scalars")

    # -- lifetime --------------------------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write what is queued to disk."""
        for w in self.all_writers.values():
            w.flush()

    def close(self) -> None:
        """Flush and close every event file (the writer opens a new one if used again)."""
        for w in self.all_writers.values():
            w.flush()
            w.close()
        self.file_writer, self.all_writers = None, {}

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _hparams(hparam_dict: dict, metric_dict: dict, domains: dict) -> list:
    """The three summaries TensorBoard's HParams plugin reads (the experiment, the session's start and its end), as
    torch writes them."""
    metadata = hparams_metadata
    ssi = SessionStartInfo()
    infos = []
    for k, v in hparam_dict.items():
        if v is None:
            continue
        if isinstance(v, Tensor):
            v = _scalar(v)
        if isinstance(v, bool):
            ssi.hparams[k].bool_value, kind, field = v, "DATA_TYPE_BOOL", "bool_value"
        elif isinstance(v, (int, float)):
            ssi.hparams[k].number_value, kind, field = v, "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(v, str):
            ssi.hparams[k].string_value, kind, field = v, "DATA_TYPE_STRING", "string_value"
        else:
            raise ValueError("value should be one of int, float, str, bool, or a tensor")
        discrete = struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in domains[k]]) \
            if k in domains else None
        infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value(kind), domain_discrete=discrete))
    experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=[
        api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k)) for k in metric_dict])
    end = SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))
    out = []
    for tag, data in ((metadata.EXPERIMENT_TAG, HParamsPluginData(experiment=experiment)),
                      (metadata.SESSION_START_INFO_TAG, HParamsPluginData(session_start_info=ssi)),
                      (metadata.SESSION_END_INFO_TAG, HParamsPluginData(session_end_info=end))):
        data.version = metadata.PLUGIN_DATA_VERSION
        out.append(summary_pb2.Summary(value=[summary_pb2.Summary.Value(
            tag=tag, metadata=_plugin(metadata.PLUGIN_NAME, data.SerializeToString()))]))
    return out
