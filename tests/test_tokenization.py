"""tokenize_prompt_and_output: ids, shifted labels and the response mask."""

import copy

import pytest
import torch
from naive import tokenize

from course import tokenize_prompt_and_output


def test_hand_worked_batch(tokenizer):
    # character ids: '0'..'9' -> 7..16, '+' -> 79, '=' -> 87, <answer> -> 5, </answer> -> 6, pad 0
    # row 0: "1+2=" + "3"                  -> [8 79 9 87 | 10]              5 tokens
    # row 1: "35+47=" + "<answer>82</answer>" -> [10 12 79 11 14 87 | 5 15 9 6] 10 tokens = L
    out = tokenize_prompt_and_output(["1+2=", "35+47="], ["3", "<answer>82</answer>"], tokenizer)
    assert set(out) >= {"input_ids", "labels", "response_mask"}
    full0 = [8, 79, 9, 87, 10, 0, 0, 0, 0, 0]
    full1 = [10, 12, 79, 11, 14, 87, 5, 15, 9, 6]
    assert out["input_ids"].tolist() == [full0[:-1], full1[:-1]]  # (B, L-1)
    assert out["labels"].tolist() == [full0[1:], full1[1:]]       # shifted by one
    # mask marks label positions holding output tokens: label 3 of row 0 is '3'; labels 5..8 of row 1
    assert out["response_mask"].tolist() == [[0, 0, 0, 1, 0, 0, 0, 0, 0],
                                             [0, 0, 0, 0, 0, 1, 1, 1, 1]]
    assert out["input_ids"].dtype == torch.long and out["labels"].dtype == torch.long


def test_pads_with_eos_when_tokenizer_has_no_pad(tokenizer):
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    out = tokenize_prompt_and_output(["1+2=", "1"], ["3", "2"], no_pad)
    # row 1 is "12" padded to 5 tokens with eos (id 2): [8 9 2 2 2]
    assert out["input_ids"][1].tolist() == [8, 9, 2, 2]
    assert out["labels"][1].tolist() == [9, 2, 2, 2]
    assert out["response_mask"][1].tolist() == [1, 0, 0, 0]


def test_matches_naive_on_ragged_batch_with_empty_response(tokenizer):
    prompts = ["What is 2+2?\n", "", "<think>", "a b c", "9*9="]
    outputs = ["<think>2+2</think> <answer>4</answer>", "x", "", "d", "81 is it"]
    out = tokenize_prompt_and_output(prompts, outputs, tokenizer)
    expected = tokenize(prompts, outputs, tokenizer)
    for key in ("input_ids", "labels", "response_mask"):
        assert out[key].shape == expected[key].shape, key
        assert torch.equal(out[key].long(), expected[key]), key
    # the empty response has no label position in the mask
    assert out["response_mask"][2].sum() == 0


def test_mismatched_lengths_raise_naming_the_argument(tokenizer):
    with pytest.raises(ValueError, match="prompt_strs|output_strs"):
        tokenize_prompt_and_output(["1+2=", "3+4="], ["3"], tokenizer)
