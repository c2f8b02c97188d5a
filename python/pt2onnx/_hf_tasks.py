"""The tasks `pt2onnx-pretrained` / `hf.export_pretrained` export a checkpoint for, as data.

One `Task` per task, under optimum's names (optimum.exporters.TasksManager; its synonyms
accepted too, so `optimum-cli export onnx --task T` commands carry over): the transformers
auto classes that load the model, the modality of its inputs, the outputs the file has (the
names and order optimum's exporter writes, so files are interchangeable), and the
architecture class-name endings that imply the task when none is given. The example inputs
and dynamic axes of each modality are in python/pt2onnx/_hf_inputs.py.

This module imports neither torch nor transformers: the command decides the task (and looks
the program cache up) before either is needed.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Task:
    """One export task.

    name: optimum's task name.
    auto: transformers auto classes, in order: the first whose mapping holds the config's
        type loads the model.
    inputs: the inputs' modality (python/pt2onnx/_hf_inputs.py): "text", "choices" (text of
        shape batch x choices x sequence), "vision", "audio", "text+vision", "series",
        "decoder" (text with a KV cache), "seq2seq", "trajectory" (states, actions,
        returns to go and timesteps of a reinforcement-learning episode).
    outputs: the file's outputs, optimum's names in optimum's order; () keeps the model's own
        (the generation tasks name their caches in C++).
    endings: architecture class-name endings (config.json's "architectures") that imply it.
    """

    name: str
    auto: tuple[str, ...]
    inputs: str
    outputs: tuple[str, ...] = ()
    endings: tuple[str, ...] = ()
    summary: str = ""

    @property
    def with_past(self) -> bool:
        return self.name.endswith("-with-past")


_T = Task
TASK_TABLE: tuple[Task, ...] = (
    _T("text-generation-with-past", ("AutoModelForCausalLM",), "decoder",
       endings=("ForCausalLM", "LMHeadModel"),
       summary="a decoder step with a KV cache (prefill and decode in one file)"),
    _T("text-generation", ("AutoModelForCausalLM",), "text", ("logits",),
       summary="a decoder's logits, no cache"),
    _T("feature-extraction", ("AutoModel",), "text", ("last_hidden_state",),
       endings=("Model",), summary="the base model's last hidden state"),
    _T("feature-extraction-with-past", ("AutoModel",), "decoder",
       summary="a decoder's base model step with a KV cache: last_hidden_state, present"),
    _T("text-classification", ("AutoModelForSequenceClassification",), "text", ("logits",),
       endings=("ForSequenceClassification",)),
    _T("token-classification", ("AutoModelForTokenClassification",), "text", ("logits",),
       endings=("ForTokenClassification",)),
    _T("question-answering", ("AutoModelForQuestionAnswering",), "text",
       ("start_logits", "end_logits"), endings=("ForQuestionAnswering",)),
    _T("fill-mask", ("AutoModelForMaskedLM",), "text", ("logits",),
       endings=("ForMaskedLM",)),
    _T("multiple-choice", ("AutoModelForMultipleChoice",), "choices", ("logits",),
       endings=("ForMultipleChoice",)),
    # Speech encoder-decoders too: pt2onnx's earlier "seq2seq" names (synonyms below) took both.
    _T("text2text-generation", ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq"), "seq2seq",
       ("logits",), summary="the encoder-decoder forward with decoder_input_ids, no cache"),
    _T("text2text-generation-with-past", ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq"),
       "seq2seq",
       summary="encoder file + decoder-step file with a KV cache"),
    # Vision encoder-decoders (VisionEncoderDecoder, Pix2Struct, ...): optimum's
    # AutoModelForVision2Seq, which transformers 5 folds into AutoModelForImageTextToText.
    _T("image-to-text", ("AutoModelForImageTextToText", "AutoModelForVision2Seq"), "seq2seq",
       ("logits",), summary="a vision encoder-decoder's forward with decoder_input_ids, no cache"),
    _T("image-to-text-with-past", ("AutoModelForImageTextToText", "AutoModelForVision2Seq"),
       "seq2seq", endings=("VisionEncoderDecoderModel",),
       summary="encoder file (the image) + decoder-step file with a KV cache"),
    _T("automatic-speech-recognition", ("AutoModelForCTC", "AutoModelForSpeechSeq2Seq"),
       "audio", ("logits",), endings=("ForCTC",),
       summary="CTC models one file (logits); Whisper-like models their forward, no cache"),
    _T("automatic-speech-recognition-with-past", ("AutoModelForSpeechSeq2Seq",), "seq2seq",
       summary="speech encoder-decoders: encoder file + decoder-step file with a KV cache"),
    _T("audio-classification", ("AutoModelForAudioClassification",), "audio", ("logits",),
       endings=("ForAudioClassification",)),
    _T("audio-frame-classification", ("AutoModelForAudioFrameClassification",), "audio",
       ("logits",), endings=("ForAudioFrameClassification",)),
    _T("audio-xvector", ("AutoModelForAudioXVector",), "audio", ("logits", "embeddings"),
       endings=("ForXVector",)),
    _T("image-classification", ("AutoModelForImageClassification",), "vision", ("logits",),
       endings=("ForImageClassification", "ForImageClassificationWithTeacher")),
    _T("semantic-segmentation", ("AutoModelForSemanticSegmentation",), "vision", ("logits",),
       endings=("ForSemanticSegmentation",)),
    _T("image-segmentation", ("AutoModelForImageSegmentation",
                              "AutoModelForSemanticSegmentation"), "vision", ("logits",)),
    _T("object-detection", ("AutoModelForObjectDetection",), "vision",
       ("logits", "pred_boxes"), endings=("ForObjectDetection",)),
    _T("depth-estimation", ("AutoModelForDepthEstimation",), "vision", ("predicted_depth",),
       endings=("ForDepthEstimation",)),
    _T("masked-im", ("AutoModelForMaskedImageModeling",), "vision", ("reconstruction",),
       endings=("ForMaskedImageModeling",)),
    _T("image-to-image", ("AutoModelForImageToImage",), "vision", ("reconstruction",),
       endings=("ForImageSuperResolution",)),
    _T("keypoint-detection", ("AutoModelForKeypointDetection",), "vision", ("heatmaps",),
       endings=("ForKeypointDetection",)),
    _T("zero-shot-image-classification", ("AutoModelForZeroShotImageClassification",),
       "text+vision", ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")),
    _T("zero-shot-object-detection", ("AutoModelForZeroShotObjectDetection",), "text+vision",
       ("logits", "pred_boxes", "text_embeds", "image_embeds"),
       endings=("ForObjectDetection",)),
    _T("time-series-forecasting", ("AutoModelForTimeSeriesPrediction",), "series",
       ("prediction_outputs",), endings=("ForPrediction",)),
    # optimum loads it with AutoModel too; only configs of trajectories (state_dim, act_dim:
    # the Decision Transformer) have the inputs.
    _T("reinforcement-learning", ("AutoModel",), "trajectory",
       ("state_preds", "action_preds", "return_preds", "last_hidden_state"),
       endings=("DecisionTransformerModel",),
       summary="a Decision Transformer's predictions over a trajectory"),
)
# optimum's classes for pairs no auto class maps (TasksManager._CUSTOM_CLASSES).
CUSTOM_CLASSES: dict[tuple[str, str], str] = {
    ("time-series-forecasting", "patchtst"): "PatchTSTForPrediction",
    ("time-series-forecasting", "patchtsmixer"): "PatchTSMixerForPrediction",
}
# The tasks written as two files, an encoder and a decoder step (python/pt2onnx/_hf_seq2seq.py).
PAIRED = frozenset({"text2text-generation-with-past", "automatic-speech-recognition-with-past",
                    "image-to-text-with-past"})
TASKS_BY_NAME: dict[str, Task] = {t.name: t for t in TASK_TABLE}
TASKS: tuple[str, ...] = tuple(TASKS_BY_NAME)

# optimum's synonyms (TasksManager._SYNONYM_TASK_MAP), and pt2onnx's earlier names.
SYNONYMS: dict[str, str] = {
    "audio-ctc": "automatic-speech-recognition",
    "causal-lm": "text-generation",
    "causal-lm-with-past": "text-generation-with-past",
    "default": "feature-extraction",
    "default-with-past": "feature-extraction-with-past",
    "masked-lm": "fill-mask",
    "mask-generation": "feature-extraction",
    "sentence-similarity": "feature-extraction",
    "image-feature-extraction": "feature-extraction",
    "pretraining": "feature-extraction",
    "seq2seq-lm": "text2text-generation",
    "seq2seq-lm-with-past": "text2text-generation-with-past",
    "sequence-classification": "text-classification",
    "zero-shot-classification": "text-classification",
    "summarization": "text2text-generation",
    "translation": "text2text-generation",
    "speech2seq-lm": "automatic-speech-recognition",
    "speech2seq-lm-with-past": "automatic-speech-recognition-with-past",
    # pt2onnx before optimum's names: one name for text and speech encoder-decoders.
    "seq2seq": "text2text-generation",
    "seq2seq-with-past": "text2text-generation-with-past",
}


def resolve(name: str) -> Task:
    """The task of a name or synonym; ValueError naming the known ones otherwise."""
    canonical = SYNONYMS.get(name, name)
    if canonical not in TASKS_BY_NAME:
        raise ValueError(f"unknown task {name!r}: pt2onnx exports {', '.join(TASKS)} "
                         f"(optimum's synonyms too: {', '.join(sorted(SYNONYMS))})")
    return TASKS_BY_NAME[canonical]


def infer(config: dict) -> Task:
    """The task a checkpoint's config.json implies, from its first architecture's class name
    (as optimum infers it from the model class): a causal LM is exported with its cache, an
    encoder-decoder ("...ForConditionalGeneration") with its cache as text or speech. Raises
    ValueError when the name says nothing (pass a task)."""
    archs = config.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if arch.endswith("ForConditionalGeneration") or arch.endswith("ForSpeechSeq2Seq"):
        speech = arch.startswith(("Whisper", "Speech2Text", "MoonShine", "Moonshine"))
        image = arch.startswith(("Pix2Struct", "PPFormulaNet"))
        return TASKS_BY_NAME["automatic-speech-recognition-with-past" if speech
                             else "image-to-text-with-past" if image
                             else "text2text-generation-with-past"]
    # The longest ending wins ("ForImageClassificationWithTeacher" over "Model").
    best = None
    for task in TASK_TABLE:
        for ending in task.endings:
            if arch.endswith(ending) and (best is None or len(ending) > len(best[1])):
                best = (task, ending)
    if best is None:
        raise ValueError(f"config.json's architectures ({str(archs)[:200] or 'none'}) name no "
                         "class whose "
                         f"task pt2onnx can infer; pass --task (one of {', '.join(TASKS)})")
    return best[0]
