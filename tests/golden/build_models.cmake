# Generates the golden models of tests/golden/model/recipes.json at build time (qvl make-random-model; qvl quantize
# for the quantised variants), and
# defines a test that checks their bytes against the digests recorded when the goldens were made.
file(READ ${CMAKE_CURRENT_LIST_DIR}/model/recipes.json _recipes)
# A changed recipe list configures again and remakes the models (a recipe may change under the same name).
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/model/recipes.json)
string(JSON _count LENGTH "${_recipes}" models)
math(EXPR _last "${_count} - 1")
set(QVL_GOLDEN_MODEL_DIR ${CMAKE_BINARY_DIR}/golden-models)
set(_outputs "")
foreach(i RANGE ${_last})
  string(JSON _name GET "${_recipes}" models ${i} name)
  set(_stamp ${QVL_GOLDEN_MODEL_DIR}/${_name}/config.json)
  # A quantised variant is made from its float model by qvl quantize (after it, hence listed after it).
  string(JSON _from ERROR_VARIABLE _not_quantised GET "${_recipes}" models ${i} from)
  if(NOT _not_quantised)
    string(JSON _weights GET "${_recipes}" models ${i} weights)
    add_custom_command(OUTPUT ${_stamp}
      COMMAND $<TARGET_FILE:qvl> quantize --model ${QVL_GOLDEN_MODEL_DIR}/${_from} --weights ${_weights}
              --out ${QVL_GOLDEN_MODEL_DIR}/${_name} --overwrite
      DEPENDS qvl ${QVL_GOLDEN_MODEL_DIR}/${_from}/config.json ${CMAKE_CURRENT_LIST_DIR}/model/recipes.json
      COMMENT "Quantising golden model ${_name}" VERBATIM)
    list(APPEND _outputs ${_stamp})
    continue()
  endif()
  string(JSON _dtype GET "${_recipes}" models ${i} dtype)
  string(JSON _seed GET "${_recipes}" models ${i} seed)
  string(JSON _shard GET "${_recipes}" models ${i} shard_size_mb)
  string(JSON _min GET "${_recipes}" models ${i} min_pixels)
  string(JSON _max GET "${_recipes}" models ${i} max_pixels)
  set(_config ${CMAKE_CURRENT_LIST_DIR}/model/${_name}.config.json)
  set(_shard_args "")
  if(NOT _shard EQUAL 0)
    set(_shard_args --shard-size-mb ${_shard})
  endif()
  add_custom_command(OUTPUT ${_stamp}
    COMMAND $<TARGET_FILE:qvl> make-random-model --config ${_config} --out ${QVL_GOLDEN_MODEL_DIR}/${_name} --dtype ${_dtype}
            --seed ${_seed} --min-pixels ${_min} --max-pixels ${_max} ${_shard_args} --overwrite
    DEPENDS qvl ${_config} ${CMAKE_BINARY_DIR}/resources/tokenizer/tokenizer.json ${CMAKE_CURRENT_LIST_DIR}/model/recipes.json
    COMMENT "Generating golden model ${_name}" VERBATIM)
  list(APPEND _outputs ${_stamp})
endforeach()
add_custom_target(qvl_golden_models ALL DEPENDS ${_outputs})
add_test(NAME golden.model_bytes COMMAND ${CMAKE_COMMAND} -DRECIPES=${CMAKE_CURRENT_LIST_DIR}/model/recipes.json
                                         -DMODELS=${QVL_GOLDEN_MODEL_DIR} -P ${CMAKE_CURRENT_LIST_DIR}/check_model_digests.cmake)
