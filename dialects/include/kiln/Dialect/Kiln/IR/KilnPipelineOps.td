//===- KilnPipelineOps.td - Transfers between pipeline stages -*- tablegen -*-===//
//
// Pipeline parallel (docs/pp.md). The layers are split into `stages`
// consecutive stages; stage `s` runs on the pp rank `s % pp` (with
// interleaving a rank holds several). The frontend ends a stage's forward
// with `pipe_send` of its output activation and begins the next one's with
// `pipe_recv`; autodiff gives each its mirror image for the activation's
// gradient, so a stage's @forward_loss is all the IR knows of it, and the
// transfers are what connect the stages.
//
// `kiln-pipeline-schedule` orders every microbatch's forward and backward
// for the schedule, then lowers each transfer to a start (tagged by its
// microbatch, stage and direction, so the two ends match) and a `wait`,
// placed where the schedule has the data ready and no rank can wait on
// another in a cycle.
//
// Included from KilnOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KILN_IR_KILNPIPELINEOPS_TD
#define KILN_DIALECT_KILN_IR_KILNPIPELINEOPS_TD

def Kiln_PipeDirection : I32EnumAttr<"PipeDirection",
    "what a pipeline transfer carries", [
  I32EnumAttrCase<"activation", 0>, I32EnumAttrCase<"gradient", 1>
]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_PipeDirectionAttr : EnumAttr<Kiln_Dialect, Kiln_PipeDirection,
                                      "pipe_direction"> {
  let assemblyFormat = "$value";
}

def Kiln_PipeSendOp : Kiln_Op<"pipe_send", [
    MemoryEffects<[MemWrite]>,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "stage `stage` hands a tensor to its neighbour stage";
  let description = [{
    An `activation` goes to stage `stage + 1` (the stage's output), a
    `gradient` to stage `stage - 1` (the gradient of what the stage
    received). It has no result: autodiff treats it as a sink, whose
    operand's gradient is what the next stage sends back (a `pipe_recv` of
    direction `gradient`).

    ```mlir
    kiln.pipe_send %h activation {stage = 0 : i64, stages = 2 : i64} : tensor<2x32x64xf32>
    ```

    Rules:
    - pipe_c1: `stage` lies in [0, `stages`), and the neighbour it sends to
      exists (an activation is not sent from the last stage, a gradient
      not from the first).
  }];
  let arguments = (ins Kiln_FloatTensor:$input,
                       Kiln_PipeDirectionAttr:$direction, I64Attr:$stage,
                       I64Attr:$stages);
  let assemblyFormat = "$input $direction attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Kiln_PipeRecvOp : Kiln_Op<"pipe_recv", [
    MemoryEffects<[MemWrite]>,
    DeclareOpInterfaceMethods<Kiln_DifferentiableOpInterface>]> {
  let summary = "stage `stage` takes a tensor from its neighbour stage";
  let description = [{
    An `activation` from stage `stage - 1` (the stage's input), a
    `gradient` from stage `stage + 1` (the gradient of the stage's output).
    Its gradient is a `pipe_send` of direction `gradient`.

    ```mlir
    %h = kiln.pipe_recv activation {stage = 1 : i64, stages = 2 : i64} : tensor<2x32x64xf32>
    ```

    Rules:
    - pipe_c1: as pipe_send's, with the neighbour it receives from.
  }];
  let arguments = (ins Kiln_PipeDirectionAttr:$direction, I64Attr:$stage,
                       I64Attr:$stages);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$direction attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Kiln_PipeSendStartOp : Kiln_Op<"pipe_send_start", [
    MemoryEffects<[MemWrite]>]> {
  let summary = "begins sending a tensor to one rank of the pp axis";
  let description = [{
    Point to point: sends `input` to the rank at position `peer` of the pp
    axis, which receives it with the `pipe_recv_start` of the same `tag`.
    The result is a token (a scalar) whose `kiln.wait` is where the send has
    completed and `input` may be overwritten. Not differentiable: the
    schedule pass writes it after autodiff.

    ```mlir
    %t = kiln.pipe_send_start %h over pp {peer = 1 : i64, ranks = 2 : i64, tag = 4 : i64} : tensor<2x32x64xf32> -> tensor<f32>
    ```

    Rules:
    - pipe_start_c1: `peer` lies in [0, `ranks`) and `tag` is at least 0.
    - pipe_start_c2: its only user is a `kiln.wait`.
    - collective_axis: `ranks` is the mesh's pp size.
  }];
  let arguments = (ins Kiln_FloatTensor:$input, I64Attr:$ranks, I64Attr:$peer,
                       I64Attr:$tag);
  let results = (outs Kiln_F32Tensor:$token);
  let assemblyFormat =
      "$input `over` `pp` attr-dict `:` type($input) `->` type($token)";
  let hasVerifier = 1;
}

def Kiln_PipeRecvStartOp : Kiln_Op<"pipe_recv_start", [
    MemoryEffects<[MemWrite]>]> {
  let summary = "begins receiving a tensor from one rank of the pp axis";
  let description = [{
    Point to point: receives what the rank at position `peer` of the pp
    axis sends with the same `tag`; the value is usable after its
    `kiln.wait`.

    ```mlir
    %p = kiln.pipe_recv_start over pp {peer = 0 : i64, ranks = 2 : i64, tag = 4 : i64} : tensor<2x32x64xf32>
    ```

    Rules: as pipe_send_start's.
  }];
  let arguments = (ins I64Attr:$ranks, I64Attr:$peer, I64Attr:$tag);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "`over` `pp` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // KILN_DIALECT_KILN_IR_KILNPIPELINEOPS_TD
