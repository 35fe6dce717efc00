# The module graph: which module may use which (DESIGN.md "Layout"; docs/layout.md).
# The one place it is written down. CMakeLists.txt links the per-module libraries by it,
# and cmake/check_module_graph.cmake fails the build on an #include "fsdp/<module>/..."
# that it does not allow. A module may include itself and every module its direct
# dependencies reach (transitively); nothing else.
#
#   core ← ops ← model ← fsdp ← train ← cli   DESIGN's spine
#          ops ← optim ← fsdp                AdamW on element ranges; the engine steps shards
#          ops ← dist  ← fsdp                ranks: the model and the op set never see them
#   core ← chat ← data ← train               chat: the chat-template interpreter (Jinja, as
#                                            transformers renders it); data: tokenizer,
#                                            shards, loader, prepare (renders chat datasets)
#   model, dist ← ckpt ← config, train       sharded checkpoints, HF import/export
#   model, fsdp, ckpt ← config               YAML → typed structs, mapped onto the model's
#                                            presets, a model folder's config.json and the
#                                            engine's ShardingStrategy
#   config ← plan ← train                    the memory plan, its search, the start-up refusal
#   config ← obs  ← train                    what a run reports: metrics, traces, TensorBoard,
#                                            memory snapshots
#   train ← cli                              src/cli: main.cpp and one file per subcommand
#
# plan and obs never include train: the run uses them, not the other way round.
set(FSDP_MODULES core ops dist model optim chat data ckpt fsdp config plan obs train cli)
set(FSDP_MODULE_DEPS_core "")
set(FSDP_MODULE_DEPS_ops core)
set(FSDP_MODULE_DEPS_dist ops)
set(FSDP_MODULE_DEPS_model ops)
set(FSDP_MODULE_DEPS_optim ops)
set(FSDP_MODULE_DEPS_chat core)
set(FSDP_MODULE_DEPS_data core chat)
set(FSDP_MODULE_DEPS_ckpt model dist)
set(FSDP_MODULE_DEPS_fsdp model optim dist)
set(FSDP_MODULE_DEPS_config model fsdp ckpt)
set(FSDP_MODULE_DEPS_plan config)
set(FSDP_MODULE_DEPS_obs config)
set(FSDP_MODULE_DEPS_train ckpt config data fsdp plan obs)
set(FSDP_MODULE_DEPS_cli train)

# out_var = every module `module` may include: itself and all it reaches.
function(fsdp_module_reach module out_var)
  set(reach ${module})
  set(todo ${FSDP_MODULE_DEPS_${module}})
  while(todo)
    list(POP_FRONT todo m)
    if(NOT m IN_LIST reach)
      list(APPEND reach ${m})
      list(APPEND todo ${FSDP_MODULE_DEPS_${m}})
    endif()
  endwhile()
  set(${out_var} ${reach} PARENT_SCOPE)
endfunction()
